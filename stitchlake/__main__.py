"""`python -m stitchlake ...` is the `stitch` command."""

from stitchlake.cli.app import main

if __name__ == "__main__":
    main()
