"""Task data: local dataset loading (tasksets) and the synthetic GSM8K-format generator."""
