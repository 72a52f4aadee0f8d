"""``python -m services.producer``: a producer worker alone (tests, containers, ``up``)."""

from services.cli.producer import main

if __name__ == "__main__":
    main()
