"""The accuracy check: GSM8K through lm-eval, Wilson and McNemar gates, sequential early stop."""
