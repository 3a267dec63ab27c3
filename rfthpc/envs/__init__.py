"""Text environments for multi-turn (agentic) workflows: gymnasium's shape, text in and out."""
