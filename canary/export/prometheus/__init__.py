"""Prometheus: the metric schema, the textfile, the Pushgateway with its spool, the exporter, the dashboards."""
