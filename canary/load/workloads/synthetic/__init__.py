"""The synthetic workload (the default): fresh prompts of prompt_tokens, lengths from length_distribution."""
