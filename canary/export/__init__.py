"""Export: Prometheus (schema, textfile, Pushgateway, exporter, dashboards), reports, and the run history."""
