" .walk files: the language of wgc, the Walk Graph Compiler (Vim 8+ and Neovim).
autocmd BufRead,BufNewFile *.walk setfiletype walk
