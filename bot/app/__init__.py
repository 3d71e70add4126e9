"""The application layer: between the fronts (``bot.slack``, ``bot.console``, ``bot.cli``) and the core.

The routers (one per installation, and the fleet's over them), the replies they render, and the wiring
of each installation's core. Fronts import this package; the core never does.
"""
