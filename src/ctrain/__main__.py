from ctrain.cli import main

main(prog_name="ctrain")
