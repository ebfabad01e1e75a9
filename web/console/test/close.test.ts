// Close codes of section 13 → the sentence and the action of the console.
import { test } from "node:test";
import assert from "node:assert/strict";

import { action, codeName, reaction, sentence } from "../src/close.js";

test("the close codes of section 13 get their reaction, sentence and action", () => {
  const table: Array<[number, string, string, string, RegExp]> = [
    [4100, "process_exited", "ended", "none", /^The session ended: the program ended \(process_exited\)\.$/],
    [4100, "idle_timeout", "ended", "none", /idle too long/],
    [4100, "max_duration", "ended", "none", /maximum duration/],
    [4100, "host_rekeyed", "ended", "none", /paired again/],
    [4101, "token_expired", "open_again", "open_again", /not accepted \(token_expired\)\. Open or attach again; it asks for your passkey again\./],
    [4102, "", "host_unavailable", "attach_again", /host is unavailable: the session is detached/],
    [4103, "", "replaced", "attach_again", /taken over by another device/],
    [4104, "handshake_failed", "hard_warning", "none", /^Warning: .*tampers .* will not retry/],
    [1006, "", "reattach", "reattach", /lost\. Reattaching/],
    [1001, "", "reattach", "reattach", /lost/],
    [4013, "server_shutdown", "reattach", "reattach", /lost/],
    [4000, "", "other", "attach_again", /^The connection closed \(code 4000\)\.$/],
  ];
  for (const [code, reason, react, act, text] of table) {
    const end = { code, reason };
    assert.equal(reaction(end), react, `${code} ${reason}`);
    assert.equal(action(end), act, `${code} ${reason}`);
    assert.match(sentence(end), text, `${code} ${reason}`);
  }
  assert.equal(codeName(4103), "terminal_replaced");
  assert.equal(codeName(4104), "terminal_handshake_failed");
  assert.equal(codeName(1006), "closed_1006");
});

test("a close text that is not a code never reaches the sentence", () => {
  const text = sentence({ code: 4100, reason: "<img src=x onerror=alert(1)>" });
  assert.ok(!text.includes("<"), text);
  assert.match(text, /^The session ended: the session ended\.$/);
  assert.equal(sentence({ code: 4000, reason: "free text" }), "The connection closed (code 4000).");
});
