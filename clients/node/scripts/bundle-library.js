#!/usr/bin/env node
// npm's prepack and postpack: `bundle-library.js copy` puts the repository's
// functions/ratelimit.lua into the package as ratelimit.lua, byte for byte,
// so `npm pack` ships the library; `bundle-library.js clean` removes the copy
// again, so the library is only ever committed once.
"use strict";

const fs = require("node:fs");
const path = require("node:path");

const pkg = path.join(__dirname, "..");
const source = path.join(pkg, "..", "..", "functions", "ratelimit.lua");
const copy = path.join(pkg, "ratelimit.lua");

const action = process.argv[2];
if (action === "copy") {
  fs.copyFileSync(source, copy);
} else if (action === "clean") {
  fs.rmSync(copy, { force: true });
} else {
  console.error("usage: bundle-library.js copy|clean");
  process.exit(2);
}
