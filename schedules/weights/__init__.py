"""Weight formats and their prepared layouts (CSR, packed RNN weights)."""
