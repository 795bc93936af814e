"""The isl AST of a schedule, and the DSL's expressions, lowered into codegen's loop IR."""
