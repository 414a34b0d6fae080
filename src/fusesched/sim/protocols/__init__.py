"""Measurement protocols of published peers, replayed to the letter (see ``docs/``)."""
