"""The escalation ladder of two-person requests: who may approve now, its due steps as store rows,
and the runner that posts them (remind, mention, widen, the announced expiry)."""
