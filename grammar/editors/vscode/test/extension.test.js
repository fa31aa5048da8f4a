#!/usr/bin/env node
// Loads extension.js outside VS Code, with the `vscode` module and the language client replaced by
// recording stubs, and checks how it starts the server: the configured command and arguments,
// and a clear message (and no client) when the executable is missing.
//
// usage: node test/extension.test.js [EXTENSION_DIR]
// EXTENSION_DIR defaults to this extension; test_vsix.py passes the unpacked .vsix's extension/
// folder, so vscode-languageclient must resolve from what the package ships.

'use strict';

const assert = require('assert');
const fs = require('fs');
const Module = require('module');
const os = require('os');
const path = require('path');

const dir = path.resolve(process.argv[2] || path.join(__dirname, '..'));
const events = [];
let settings = {};

const vscodeStub = {
  window: {
    showErrorMessage: async (message, ...items) => {
      events.push({ kind: 'error', message, items });
      return undefined;
    },
  },
  workspace: {
    getConfiguration: (section) => ({ get: (key) => settings[`${section}.${key}`] }),
    onDidChangeConfiguration: () => ({ dispose() {} }),
    createFileSystemWatcher: (glob) => ({ glob, dispose() {} }),
  },
  commands: {
    registerCommand: (id) => {
      events.push({ kind: 'command', id });
      return { dispose() {} };
    },
    executeCommand: async () => undefined,
  },
};

class LanguageClientStub {
  constructor(id, name, serverOptions, clientOptions) {
    events.push({ kind: 'client', id, name, serverOptions, clientOptions });
  }
  async start() {
    events.push({ kind: 'start' });
  }
  async stop() {
    events.push({ kind: 'stop' });
  }
}

// `vscode` exists only inside the extension host: serve the stub instead. The real
// vscode-languageclient/node is resolved (proving the package ships it) and then replaced.
const load = Module._load;
Module._load = function (request, parent, isMain) {
  if (request === 'vscode') return vscodeStub;
  if (request === 'vscode-languageclient/node') {
    Module._resolveFilename(request, parent, isMain);
    return { LanguageClient: LanguageClientStub };
  }
  return load.apply(this, arguments);
};

const extension = require(path.join(dir, 'extension.js'));
const context = () => ({ subscriptions: [] });

async function missingExecutable() {
  events.length = 0;
  settings = { 'wgc.lsp.path': 'wgc-definitely-not-installed', 'wgc.lsp.args': ['lsp'] };
  const ctx = context();
  await extension.activate(ctx);
  const errors = events.filter((e) => e.kind === 'error');
  assert.strictEqual(errors.length, 1, `one error message, got ${JSON.stringify(events)}`);
  assert.match(errors[0].message, /wgc-definitely-not-installed/);
  assert.match(errors[0].message, /was not found/);
  assert.match(errors[0].message, /wgc\.lsp\.path/);
  assert.ok(!events.some((e) => e.kind === 'client'), 'no client without an executable');
  assert.ok(events.some((e) => e.kind === 'command' && e.id === 'wgc.restartServer'));
  await extension.deactivate();
}

async function startsConfiguredServer() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'walk-ext-'));
  const wgc = path.join(tmp, 'wgc');
  fs.writeFileSync(wgc, '#!/bin/sh\n', { mode: 0o755 });
  try {
    // By name, found on PATH, with the default arguments.
    events.length = 0;
    settings = { 'wgc.lsp.path': 'wgc', 'wgc.lsp.args': ['lsp'] };
    const savedPath = process.env.PATH;
    process.env.PATH = tmp + path.delimiter + (savedPath || '');
    try {
      await extension.activate(context());
    } finally {
      process.env.PATH = savedPath;
    }
    let client = events.find((e) => e.kind === 'client');
    assert.ok(client, `a client, got ${JSON.stringify(events)}`);
    assert.deepStrictEqual(client.serverOptions, { command: wgc, args: ['lsp'] });
    const selector = client.clientOptions.documentSelector;
    assert.ok(selector.every((s) => s.language === 'walk' || s.pattern === '**/*.toml'), JSON.stringify(selector));
    assert.ok(selector.some((s) => s.pattern === '**/*.toml'), 'placement files go to the server too');
    assert.ok(events.some((e) => e.kind === 'start'));
    assert.ok(!events.some((e) => e.kind === 'error'), JSON.stringify(events));
    await extension.deactivate();
    assert.ok(events.some((e) => e.kind === 'stop'));

    // By full path, with extra arguments.
    events.length = 0;
    settings = { 'wgc.lsp.path': wgc, 'wgc.lsp.args': ['lsp', '--log-level', 'DEBUG'] };
    await extension.activate(context());
    client = events.find((e) => e.kind === 'client');
    assert.deepStrictEqual(client.serverOptions, { command: wgc, args: ['lsp', '--log-level', 'DEBUG'] });
    await extension.deactivate();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

function defaultsMatchManifest() {
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const props = manifest.contributes.configuration.properties;
  const { command, args } = extension.serverCommand({ get: (key) => props[`wgc.lsp.${key}`].default });
  assert.strictEqual(command, 'wgc');
  assert.deepStrictEqual(args, ['lsp']);
}

(async () => {
  const tests = { missingExecutable, startsConfiguredServer, defaultsMatchManifest };
  let failed = 0;
  for (const [name, fn] of Object.entries(tests)) {
    try {
      await fn();
      console.log(`ok   ${name}`);
    } catch (err) {
      failed += 1;
      console.log(`FAIL ${name}\n${err && err.stack ? err.stack : err}`);
    }
  }
  process.exitCode = failed ? 1 : 0;
})();
