"""Preflight: static checks of a rendered plan (IDs, MUST statements, remedies) before anything starts."""
