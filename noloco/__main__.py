from noloco.cli import console

console()
