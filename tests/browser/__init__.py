"""The inbox page in headless Chromium (Playwright), against the whole relay."""
