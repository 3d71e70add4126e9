"""The runbooks shipped with the bot (installed as the package ``bot.runbooks_data``).

Edit the YAML files here; this file only lets packaging and importlib.resources find the folder.
"""
