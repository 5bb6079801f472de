"""Judge: verdicts, the result model, expectations (known bugs) and the statistics that judge across cells."""
