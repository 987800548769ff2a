"""The Apptainer stand-in's parts; tests/fake_apptainer.py is its entry point and overview."""
