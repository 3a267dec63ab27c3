"""rfthpc: asynchronous reinforcement fine-tuning of LLMs on Slurm, through a shared run directory."""

__version__ = "0.1.0"
