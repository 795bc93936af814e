"""The scheduling commands (the verbs users call on statements), the copy
commands and their atomicity."""
