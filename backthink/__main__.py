"""`python -m backthink` runs the command line."""

from backthink.cli import main

main()
