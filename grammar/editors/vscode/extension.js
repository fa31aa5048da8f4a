// The Walk extension: highlighting, snippets and brackets come from package.json; this file
// starts the language server, `wgc lsp` over stdio, for .walk files and placement .toml files (the
// server checks a TOML file only when it is a placement: a top-level [cluster] or extends). Plain
// JavaScript, no build.

'use strict';

const fs = require('fs');
const path = require('path');
const vscode = require('vscode');
const { LanguageClient } = require('vscode-languageclient/node');

const SECTION = 'wgc.lsp';
let client;

// Where `command` would run from: an absolute or relative path as given, or the first match on
// PATH (with PATHEXT on Windows). Undefined when there is none.
function findExecutable(command, env = process.env, platform = process.platform) {
  const isFile = (p) => {
    try {
      return fs.statSync(p).isFile();
    } catch {
      return false;
    }
  };
  const exts = platform === 'win32' ? ['', ...(env.PATHEXT || '.EXE;.CMD;.BAT').split(';')] : [''];
  if (command.includes('/') || command.includes('\\')) {
    return exts.map((e) => command + e).find(isFile);
  }
  const dirs = (env.PATH || env.Path || '').split(path.delimiter).filter(Boolean);
  for (const dir of dirs) {
    const found = exts.map((e) => path.join(dir, command + e)).find(isFile);
    if (found) return found;
  }
  return undefined;
}

function serverCommand(config) {
  const command = (config.get('path') || 'wgc').trim();
  const args = config.get('args');
  return { command, args: Array.isArray(args) ? args.map(String) : ['lsp'] };
}

async function missingExecutable(command) {
  const choice = await vscode.window.showErrorMessage(
    `Walk: the language server did not start: the executable "${command}" was not found. ` +
      'Install wgc (python -m pip install -e . in the wgc checkout) or set "wgc.lsp.path" to ' +
      "its full path, e.g. a virtual environment's bin/wgc. Highlighting and snippets work without it.",
    'Open Settings'
  );
  if (choice === 'Open Settings') {
    await vscode.commands.executeCommand('workbench.action.openSettings', SECTION);
  }
}

async function startClient() {
  const { command, args } = serverCommand(vscode.workspace.getConfiguration(SECTION));
  const executable = findExecutable(command);
  if (!executable) {
    missingExecutable(command);
    return;
  }
  // No transport given: the client spawns `command args...` and talks over its stdin/stdout
  // without appending --stdio, so wgc.lsp.args is exactly what the server receives.
  const serverOptions = { command: executable, args };
  const clientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'walk' },
      { scheme: 'untitled', language: 'walk' },
      { scheme: 'file', pattern: '**/*.toml' },
    ],
    synchronize: { fileEvents: vscode.workspace.createFileSystemWatcher('**/*.{walk,toml}') },
  };
  client = new LanguageClient('wgc', 'Walk language server (wgc lsp)', serverOptions, clientOptions);
  try {
    await client.start();
  } catch (err) {
    vscode.window.showErrorMessage(
      `Walk: "${executable} ${args.join(' ')}" failed to start: ${err && err.message ? err.message : err}. ` +
        'Check that this wgc has the lsp command (wgc lsp --help); its log is in the Output panel, "Walk language server (wgc lsp)".'
    );
  }
}

async function stopClient() {
  const running = client;
  client = undefined;
  if (running) {
    try {
      await running.stop();
    } catch {
      // Stopping a client that never started throws; there is nothing left to clean up.
    }
  }
}

async function restart() {
  await stopClient();
  await startClient();
}

function activate(context) {
  context.subscriptions.push(
    { dispose: () => stopClient() },
    vscode.commands.registerCommand('wgc.restartServer', () => restart()),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration(SECTION)) restart();
    })
  );
  return startClient();
}

function deactivate() {
  return stopClient();
}

module.exports = { activate, deactivate, findExecutable, serverCommand };
