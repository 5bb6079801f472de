"""Images under test: the image table (docker/images.yaml), patch series, and the patch overlay of an engine venv."""
