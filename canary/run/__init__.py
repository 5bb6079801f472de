"""Run: a plan end to end (deploy, check, judge, record, export), locally or in waves on Kubernetes."""
