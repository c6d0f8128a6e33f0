"""`python -m veadk_mem` runs the vmem CLI."""

from veadk_mem.cli.app import main

if __name__ == "__main__":
    main()
