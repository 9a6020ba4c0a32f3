// The HTTP request a store call belongs to. express-rate-limit hands its
// store only a key, yet a limit or META hash chosen per request needs the
// request: Node's http server announces each request on the diagnostics
// channel "http.server.request.start", synchronously, just before its
// handler runs, and the request is kept in an AsyncLocalStorage from there,
// so every await of that request's handling (the store's increment, and the
// decrement express-rate-limit sends after the response) can read it. The
// channel is only listened to once a store needs it.
"use strict";

const { AsyncLocalStorage } = require("node:async_hooks");
const diagnostics = require("node:diagnostics_channel");

const storage = new AsyncLocalStorage();
// Held here: a channel nobody references may be collected with its subscribers.
const requests = diagnostics.channel("http.server.request.start");
let listening = false;

function enter({ request, response }) {
  storage.enterWith({ request, response });
}

/** Starts following requests (idempotent). */
function followRequests() {
  if (listening) return;
  listening = true;
  requests.subscribe(enter);
}

/** { request, response } of the HTTP request being handled, or undefined. */
function currentRequest() {
  return storage.getStore();
}

module.exports = { followRequests, currentRequest };
