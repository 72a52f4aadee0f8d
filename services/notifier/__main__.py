"""``python -m services.notifier``: the notifier alone (tests, containers)."""

from services.cli.notifier import main

if __name__ == "__main__":
    main()
