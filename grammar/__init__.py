"""wgc.grammar: walk.lark, the one grammar of the .walk language, and editor support."""
