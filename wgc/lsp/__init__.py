"""`wgc lsp`: a language server for .walk files (diagnostics, hover, navigation, completion, formatting)."""
