// The FUNCTION library this package ships: `ratelimit.lua`, copied into the
// package from the repository's one `functions/ratelimit.lua` when it is
// packed (scripts/bundle-library.js, npm's prepack), read from the
// repository itself when the package runs from its source tree.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { libraryVersion } = require("./core");

// The packed copy first; then the repository's, for a source checkout.
const CANDIDATES = [
  path.join(__dirname, "..", "ratelimit.lua"),
  path.join(__dirname, "..", "..", "..", "functions", "ratelimit.lua"),
];

let cached;

/** { path, source, version } of the bundled library, or null if there is none. */
function bundledLibrary() {
  if (cached !== undefined) return cached;
  cached = null;
  for (const file of CANDIDATES) {
    let source;
    try {
      source = fs.readFileSync(file, "utf8");
    } catch {
      continue;
    }
    cached = Object.freeze({ path: file, source, version: libraryVersion(source) });
    break;
  }
  return cached;
}

module.exports = { bundledLibrary };
