"""Rules stage: re-evaluate context-length refusals, sibling rules and challenge tallies against governance."""
