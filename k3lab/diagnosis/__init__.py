"""Diagnosis: from a failed run's logs to its most likely cause (k3lab.diagnosis.engine), against the
catalogue of known failure modes (catalogue.yaml), for the bring-up, the reports and ``k3lab triage``."""
