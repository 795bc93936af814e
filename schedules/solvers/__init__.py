"""The solvers, one module per family; solver modules never import each
other."""
