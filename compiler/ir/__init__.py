"""The integer IR and what it carries: graph, fusion sites, pass context, epilogue, layout, semantics."""
