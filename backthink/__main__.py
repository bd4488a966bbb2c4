"""`python -m backthink` runs the command line."""

from backthink.cli.root import main

main()
