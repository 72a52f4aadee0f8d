"""``python -m services.gatekeeper``: the gatekeeper alone (tests, containers)."""

from services.cli.gatekeeper import main

if __name__ == "__main__":
    main()
