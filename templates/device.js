// deno-lint-ignore-file no-window no-window-prefix -- a browser page script: window is its global
// The device page's script (spec §4.1). src/templates.ts inlines it into device.html, in the
// script element that carries the CSP nonce, so it must not contain a closing script tag,
// an HTML comment opener or a template placeholder: the loader refuses them. It reads every
// value it needs from the #flow-data block.
(() => {
  "use strict";
  const data = JSON.parse(document.getElementById("flow-data").textContent);
  const byId = (id) => document.getElementById(id);
  const card = byId("card");
  const statusBox = byId("status-box");
  const statusText = byId("status");
  const timer = byId("timer");
  const countdown = byId("countdown");
  const codeEl = byId("user-code");
  const copyLabel = byId("copy-label");
  const copyFeedback = byId("copy-feedback");
  const BLOCKED_SCHEMES = ["javascript:", "data:", "vbscript:", "file:"];
  const COPY_FEEDBACK_MS = 2000;

  let finished = false;
  let pollTimer = 0;
  let tickTimer = 0;

  function setStatus(state, text) {
    statusBox.dataset.state = state;
    statusText.textContent = text;
    statusBox.scrollIntoView({ block: "nearest" }); // on a phone it may be below the fold
  }

  // ---- countdown: from a deadline, so a throttled background tab stays accurate ----
  const deadline = performance.now() + data.expiresInSeconds * 1000;

  function formatSeconds(total) {
    const minutes = Math.floor(total / 60);
    const seconds = total % 60;
    return minutes + ":" + String(seconds).padStart(2, "0");
  }

  function stopCountdown() {
    clearInterval(tickTimer);
    timer.hidden = true;
    countdown.hidden = true;
  }

  function tick() {
    const left = Math.max(0, Math.ceil((deadline - performance.now()) / 1000));
    countdown.textContent = formatSeconds(left);
    countdown.dateTime = "PT" + left + "S";
    if (left === 0) {
      stopCountdown();
      if (!finished) {
        setStatus(
          "expired",
          "This code has expired. Go back to the application and start signing in again.",
        );
      }
    }
  }

  // ---- polling ----
  function finish() {
    finished = true;
    clearTimeout(pollTimer);
    stopCountdown();
    card.dataset.done = "";
  }

  function schedulePoll() {
    if (!finished) pollTimer = setTimeout(poll, data.pollIntervalMs);
  }

  async function poll() {
    if (finished) return;
    let body;
    try {
      const query = new URLSearchParams({ flow_state: data.flowState });
      const separator = data.pollUrl.includes("?") ? "&" : "?";
      const response = await fetch(data.pollUrl + separator + query.toString(), {
        cache: "no-store",
        headers: { Accept: "application/json" },
        signal: typeof AbortSignal.timeout === "function"
          ? AbortSignal.timeout(data.pollTimeoutMs)
          : undefined,
      });
      body = await response.json();
    } catch {
      schedulePoll(); // network or parse error: keep polling
      return;
    }
    const status = body !== null && typeof body === "object" ? body.status : undefined;
    if (status === "complete") {
      complete(body);
    } else if (status === "failed" || status === "expired") {
      finish();
      const error = body.error === undefined ? "unknown error" : String(body.error);
      setStatus("error", "Authentication failed: " + error);
    } else {
      schedulePoll(); // pending, or an answer without a status
    }
  }

  function redirectTarget(raw, body) {
    let url;
    try {
      url = new URL(raw);
    } catch {
      return null;
    }
    if (BLOCKED_SCHEMES.includes(url.protocol)) return null;
    url.searchParams.set("code", String(body.code ?? ""));
    if (typeof body.state === "string") url.searchParams.set("state", body.state);
    if (typeof data.issuer === "string" && data.issuer !== "") {
      url.searchParams.set("iss", data.issuer); // RFC 9207
    }
    return url.href;
  }

  function complete(body) {
    finish();
    if (typeof body.redirect_uri !== "string" || body.redirect_uri === "") {
      setStatus("success", "Signed in. You can close this tab and return to the application.");
      return;
    }
    const target = redirectTarget(body.redirect_uri, body);
    if (target === null) {
      setStatus("error", "Authentication failed: invalid redirect_uri");
      return;
    }
    setStatus("success", "Signed in — returning to the application…");
    setTimeout(() => location.assign(target), data.redirectDelayMs);
  }

  // ---- copy ----
  let copyTimer = 0;
  function copyDone(label, announcement) {
    copyLabel.textContent = label;
    copyFeedback.textContent = announcement;
    clearTimeout(copyTimer);
    copyTimer = setTimeout(() => {
      copyLabel.textContent = "Copy";
      copyFeedback.textContent = "";
    }, COPY_FEEDBACK_MS);
  }

  function selectCode() {
    const selection = window.getSelection();
    const range = document.createRange();
    range.selectNodeContents(codeEl);
    selection.removeAllRanges();
    selection.addRange(range);
  }

  byId("copy-button").addEventListener("click", async () => {
    const code = codeEl.textContent.trim();
    try {
      if (!navigator.clipboard || !window.isSecureContext) throw new Error("no clipboard");
      await navigator.clipboard.writeText(code);
      copyDone("Copied", "Code copied to the clipboard");
    } catch {
      selectCode();
      copyDone("Selected", "Code selected: press Control+C or Command+C to copy it");
    }
  });

  tick();
  tickTimer = setInterval(tick, data.countdownTickMs);
  pollTimer = setTimeout(poll, data.pollIntervalMs);
})();
