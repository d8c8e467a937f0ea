"""Reporting: run reports, the run index and sweep reports, rendered from typed view models by jinja2."""
