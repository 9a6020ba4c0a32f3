// The README's JavaScript examples are JavaScript: each ```js block
// compiles (as the body of an async function, for its awaits). What they
// do is tested by the programs they are taken from (named in each block).
//   node --test test/unit/
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");

const readme = fs.readFileSync(path.join(__dirname, "..", "..", "README.md"), "utf8");
const blocks = [...readme.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);

test("the README's js blocks compile", () => {
  assert.ok(blocks.length >= 8, `${blocks.length} js blocks`);
  for (const [i, code] of blocks.entries()) {
    assert.doesNotThrow(() => new vm.Script(`(async () => {\n${code}\n})`), `block ${i + 1}:\n${code}`);
  }
});

test("the README names only options the package takes", () => {
  const { Limiter, ValkeyStore } = require("../..");
  const send = () => null;
  for (const [, option] of readme.matchAll(/^\| `(\w+)`(?:, `\w+`)* \| [^|]* \|/gm)) {
    if (option === "sendCommand") continue;
    const storeOptions = { sendCommand: send };
    // The value does not matter for the name check: an unknown name fails first.
    try {
      new ValkeyStore({ ...storeOptions, [option]: undefined });
    } catch (e) {
      assert.ok(!/is not an option/.test(e.message), `${option}: ${e.message}`);
    }
  }
  assert.ok(new Limiter({ sendCommand: send }));
});
