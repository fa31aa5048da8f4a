" Vim syntax file
" Language:    Walk (.walk), the language of wgc, the Walk Graph Compiler
" Maintainer:  the wgc project
" Reference:   docs/language.md; the grammar is grammar/walk.lark
"
" Works in Vim 8+ and Neovim. Every keyword of grammar/walk.lark has a rule here; the test
" tests/editors/test_keyword_coverage.py fails when one is added to the grammar and not here.

if exists('b:current_syntax')
  finish
endif

let s:cpo_save = &cpo
set cpo&vim

syntax case match
syntax iskeyword @,48-57,_,192-255

" ---- comments and literals ------------------------------------------------------------------
syntax keyword walkTodo TODO FIXME XXX NOTE contained
syntax match   walkComment /#.*$/ contains=walkTodo,@Spell
syntax region  walkString start=/"/ skip=/\\./ end=/"/ oneline contains=walkEscape
syntax match   walkEscape /\\./ contained
" Of two matches starting at the same column the one defined last wins: integers first, then
" floats and sizes, which start with one.
syntax match   walkNumber /\<\d\+\>/
syntax match   walkFloat /\<\d\+\.\d\+\%([eE][-+]\=\d\+\)\=\>/
syntax match   walkFloat /\<\d\+[eE][-+]\=\d\+\>/
syntax match   walkSize /\<\d\+\%(\.\d\+\)\=[KMBT]\>/
syntax keyword walkBoolean true false

" Matches that follow an operator (`-> done`, `dtype = bf16`) look behind it with \@<=, so the
" operator's own match does not hide them.
syntax match   walkOperator /->\|==\|!=\|<=\|>=\|\.\.\|[-+*/%<>=]/

" ---- declarations: the keyword, then the name it declares ------------------------------------
syntax keyword walkDeclaration model nextgroup=walkModelName skipwhite skipnl
syntax keyword walkDeclaration param nextgroup=walkParamName skipwhite skipnl
syntax keyword walkDeclaration walk nextgroup=walkFunctionName skipwhite skipnl
syntax keyword walkDeclaration flow nextgroup=walkFlowName skipwhite skipnl
syntax keyword walkDeclaration const nextgroup=walkConstName skipwhite skipnl
syntax keyword walkDeclaration labels nextgroup=walkLabelName skipwhite skipnl
syntax keyword walkStructure   component nextgroup=walkComponentName skipwhite skipnl
syntax keyword walkStructure   stream nextgroup=walkStreamName skipwhite skipnl
syntax keyword walkInclude     import
syntax match   walkModelName     /\h\w*/ contained
syntax match   walkParamName     /\h\w*/ contained
syntax match   walkConstName     /\h\w*/ contained
syntax match   walkStreamName    /\h\w*/ contained
syntax match   walkComponentName /\h\w*/ contained
syntax match   walkFunctionName  /\h\w*/ contained
" `flow when COND {` has no name: `when` is not one.
syntax match   walkFlowName      /\<\%(when\>\)\@!\h\w*/ contained
syntax match   walkLabelName     /\h\w*/ contained nextgroup=walkLabelComma skipwhite
syntax match   walkLabelComma    /,/ contained nextgroup=walkLabelName skipwhite

" An entry point in a component body: a line that starts with `name(` (statements never do).
syntax match   walkFunctionName /^\s*\zs\h\w*\ze\s*(/
" A call: comp.entry(...).
syntax match   walkCall /\%(\.\s*\)\@<=\h\w*\ze\s*(/

" ---- components and streams -------------------------------------------------------------------
syntax keyword walkKeyword engine nextgroup=walkEngineKind skipwhite
syntax keyword walkEngineKind kv stateless contained
syntax keyword walkKeyword from to capacity
syntax keyword walkKeyword at_end after_end nextgroup=walkEndRule skipwhite
syntax keyword walkEndRule flush pad drop stop continue contained
syntax match   walkPolicy /\<\%(fixed\|sliding\|left_context\)\>\ze\s*(/

" ---- statements, loops, flows -------------------------------------------------------------------
syntax keyword walkStatement send emit fork recv return parallel branch each
syntax keyword walkRepeat    loop until max
syntax keyword walkKeyword   carry nospec as on
syntax keyword walkStatement yield
syntax keyword walkKeyword   terminal accumulated
syntax keyword walkConditional when
syntax keyword walkOperatorWord and or not in
" `start` and `done` are flow states only beside an arrow; elsewhere they are ordinary names.
syntax match   walkFlowState /\<\%(start\|done\)\>\ze\s*->/
syntax match   walkFlowState /\%(->\s*\)\@<=\<\%(start\|done\)\>/

" ---- types: tensor[N, 64; bf16], token[_, 16], seq[tensor[...]] ----------------------------------
syntax keyword walkType token tokens tensor image audio video text action scalar seq int float bool str
      \ nextgroup=walkTypeArgs skipwhite
syntax region  walkTypeArgs matchgroup=walkDelimiter start=/\[/ end=/\]/ contained
      \ contains=walkType,walkDtype,walkDim,walkWildcard,walkNumber,walkComment
" bool is a dtype too; walkType already covers it.
syntax keyword walkDtype bf16 f16 f32 f64 fp8 i64 i32 i16 i8 u8 contained
syntax match   walkDim /\<\h\w*\>/ contained
syntax match   walkWildcard /\<_\>/
" dtype = bf16 in a component body
syntax match   walkAttrDtype /\%(\<dtype\s*=\s*\)\@<=\%(bf16\|f16\|f32\|f64\|fp8\|i64\|i32\|i16\|i8\|u8\)\>/

" ---- highlight links: the standard groups ---------------------------------------------------------
highlight default link walkComment       Comment
highlight default link walkTodo          Todo
highlight default link walkString        String
highlight default link walkEscape        SpecialChar
highlight default link walkNumber        Number
highlight default link walkSize          Number
highlight default link walkFloat         Float
highlight default link walkBoolean       Boolean
highlight default link walkDeclaration   Keyword
highlight default link walkStructure     Structure
highlight default link walkInclude       Include
highlight default link walkKeyword       Keyword
highlight default link walkStatement     Statement
highlight default link walkRepeat        Repeat
highlight default link walkConditional   Conditional
highlight default link walkOperatorWord  Operator
highlight default link walkOperator      Operator
highlight default link walkFlowState     Constant
highlight default link walkEngineKind    Constant
highlight default link walkEndRule       Constant
highlight default link walkPolicy        Function
highlight default link walkFunctionName  Function
highlight default link walkFlowName      Function
highlight default link walkCall          Function
highlight default link walkComponentName Type
highlight default link walkStreamName    Identifier
highlight default link walkParamName     Identifier
highlight default link walkModelName     Identifier
highlight default link walkConstName     Constant
highlight default link walkLabelName     Identifier
highlight default link walkType          Type
highlight default link walkDtype         Type
highlight default link walkAttrDtype     Type
highlight default link walkDim           Identifier
highlight default link walkWildcard      Constant
highlight default link walkDelimiter     Delimiter

let b:current_syntax = 'walk'

let &cpo = s:cpo_save
unlet s:cpo_save
