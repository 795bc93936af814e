"""One problem per operator, parsed once from torch-style arguments, with
an explicit, versioned key."""
