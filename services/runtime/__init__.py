"""What every service shares: settings, lifecycle, logging, metrics."""
