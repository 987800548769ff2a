from ctrain.cli import main

main()
