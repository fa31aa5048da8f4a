#!/usr/bin/env node
// Tokenises .walk programs with the extension's TextMate grammar, the way VS Code does
// (vscode-textmate + vscode-oniguruma), and fails when a keyword is left unscoped.
//
// The keywords are read from grammar/walk.lark, the one grammar: every quoted literal that is a
// word. An occurrence of one counts as scoped when some scope besides the root says what it is:
// keyword.*, storage.*, constant.language.* (true, false, start, done), or a comment or string
// around it. Every file must also end back at the root rule, so no declaration's region leaks
// into the rest of the file.
//
// usage: node test/scan-models.js [FILE.walk ...]   (default: the repository's models/*.walk)

'use strict';

const fs = require('fs');
const path = require('path');
const vsctm = require('vscode-textmate');
const oniguruma = require('vscode-oniguruma');

const EXTENSION = path.resolve(__dirname, '..');
const ROOT = path.resolve(EXTENSION, '..', '..', '..');
const GRAMMAR = path.join(EXTENSION, 'syntaxes', 'walk.tmLanguage.json');
const LARK = path.join(ROOT, 'grammar', 'walk.lark');
const SCOPED = /^(keyword|storage|constant\.language|comment|string)\./;

function larkKeywords(text) {
  const code = text.replace(/\/\/[^\n]*/g, '');
  return new Set([...code.matchAll(/"([A-Za-z_][A-Za-z0-9_]*)"/g)].map((m) => m[1]));
}

async function loadGrammar() {
  const wasm = fs.readFileSync(require.resolve('vscode-oniguruma/release/onig.wasm')).buffer;
  await oniguruma.loadWASM(wasm);
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
      createOnigString: (text) => new oniguruma.OnigString(text),
    }),
    loadGrammar: async (scopeName) =>
      scopeName === 'source.walk' ? vsctm.parseRawGrammar(fs.readFileSync(GRAMMAR, 'utf8'), GRAMMAR) : null,
  });
  return registry.loadGrammar('source.walk');
}

function scanFile(grammar, keywords, file) {
  const problems = [];
  let checked = 0;
  let stack = vsctm.INITIAL;
  const lines = fs.readFileSync(file, 'utf8').split(/\r?\n/);
  const name = path.relative(process.cwd(), file);
  lines.forEach((line, i) => {
    const { tokens, ruleStack } = grammar.tokenizeLine(line, stack);
    stack = ruleStack;
    for (const word of line.matchAll(/[A-Za-z_][A-Za-z0-9_]*/g)) {
      if (!keywords.has(word[0])) continue;
      checked += 1;
      const token = tokens.find((t) => t.startIndex <= word.index && word.index < t.endIndex);
      const scopes = token ? token.scopes : ['source.walk'];
      if (!scopes.slice(1).some((s) => SCOPED.test(s))) {
        problems.push(`${name}:${i + 1}:${word.index + 1}: keyword '${word[0]}' is not scoped as one: ${scopes.join(' ')}`);
      }
    }
  });
  if (stack.depth !== 1) {
    problems.push(`${name}: the file ends inside a region (rule stack depth ${stack.depth}): a declaration's begin/end rule never closed`);
  }
  return { problems, checked };
}

async function main() {
  const keywords = larkKeywords(fs.readFileSync(LARK, 'utf8'));
  if (keywords.size === 0) throw new Error(`no keywords found in ${LARK}`);
  let files = process.argv.slice(2);
  if (files.length === 0) {
    const models = path.join(ROOT, 'models');
    files = fs.readdirSync(models).filter((f) => f.endsWith('.walk')).sort().map((f) => path.join(models, f));
  }
  if (files.length === 0) throw new Error('no .walk files to scan');
  const grammar = await loadGrammar();
  let failed = 0;
  for (const file of files) {
    const { problems, checked } = scanFile(grammar, keywords, file);
    problems.forEach((p) => console.log(p));
    failed += problems.length;
    console.log(`${problems.length ? 'FAIL' : 'ok  '} ${path.relative(process.cwd(), file)}: ${checked} keyword occurrences`);
  }
  if (failed) {
    console.log(`${failed} problem(s); grammar: ${path.relative(process.cwd(), GRAMMAR)}`);
    process.exitCode = 1;
  }
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exitCode = 2;
});
