"""`trinity.utils.log.get_logger`: a standard-library logger (the agent's log goes to the explorer's log)."""

from __future__ import annotations

import logging
import sys


def get_logger(name: str | None = None, level: int = logging.INFO) -> logging.Logger:
    """A logger writing to stderr, which the explorer keeps in its log."""
    logger = logging.getLogger(name or "trinity")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(level)
    return logger
