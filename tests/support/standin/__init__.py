"""The Apptainer stand-in's parts; tests/support/fake_apptainer.py is its entry point and
overview."""
