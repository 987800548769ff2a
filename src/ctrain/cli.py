import click

def main() -> None:
    pass
