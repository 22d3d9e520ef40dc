// @ts-check
/// <reference lib="dom" />
// deno-lint-ignore-file no-window no-window-prefix -- a browser page script: window is its global
// The device page's script (spec §4.1). src/pages/device.ts inlines it into device.html, in the
// script element that carries the CSP nonce, so it must not contain a closing script tag,
// an HTML comment opener or a template placeholder: the loader refuses them. It reads every
// value it needs from the #flow-data block, the schemes it must never open too.
(() => {
  "use strict";

  /**
   * The #flow-data block (src/pages/device.ts).
   * @typedef {object} FlowData
   * @property {string} flowState
   * @property {string} pollUrl
   * @property {number} expiresInSeconds
   * @property {string} [issuer]
   * @property {string[]} blockedSchemes redirect schemes never opened, as `URL.protocol` says
   * @property {number} pollIntervalMs
   * @property {number} countdownTickMs
   * @property {number} redirectDelayMs
   * @property {number} pollTimeoutMs
   */

  /**
   * A poll answer (spec §2.4), as far as the script reads it; every field is checked before use.
   * @typedef {object} PollAnswer
   * @property {unknown} [status]
   * @property {unknown} [error]
   * @property {unknown} [redirect_uri]
   * @property {unknown} [code]
   * @property {unknown} [state]
   */

  /**
   * An element the page must have.
   * @param {string} id
   * @returns {HTMLElement}
   */
  function byId(id) {
    const element = document.getElementById(id);
    if (element === null) throw new Error("device page: #" + id + " is missing");
    return element;
  }

  /** @type {FlowData} */
  const data = JSON.parse(byId("flow-data").textContent ?? "");
  const card = byId("card");
  const statusBox = byId("status-box");
  const statusText = byId("status");
  const timer = byId("timer");
  const countdown = /** @type {HTMLTimeElement} */ (byId("countdown"));
  const codeEl = byId("user-code");
  const copyLabel = byId("copy-label");
  const copyFeedback = byId("copy-feedback");
  const COPY_FEEDBACK_MS = 2000;

  let finished = false;
  let pollTimer = 0;
  let tickTimer = 0;

  /**
   * @param {"pending" | "success" | "error" | "expired"} state
   * @param {string} text
   */
  function setStatus(state, text) {
    statusBox.dataset.state = state;
    statusText.textContent = text;
    statusBox.scrollIntoView({ block: "nearest" }); // on a phone it may be below the fold
  }

  // ---- countdown: from a deadline, so a throttled background tab stays accurate ----
  const deadline = performance.now() + data.expiresInSeconds * 1000;

  /** @param {number} total */
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
        explainFailure("expired");
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

  /**
   * Says below the status what happened and what to do; the return link, when the page has
   * one, was built by the server from the redirect URI /authorize validated.
   * @param {"denied" | "refused" | "expired" | "failed"} reason
   */
  function explainFailure(reason) {
    byId("help-" + reason).hidden = false;
    byId("failure-help").hidden = false;
  }

  /**
   * @param {string} error the poll's `error`
   * @param {unknown} status the poll's `status`
   * @returns {"denied" | "refused" | "expired" | "failed"}
   */
  function failureReason(error, status) {
    if (error.includes("denied")) return "denied";
    // This service's own refusal (src/sign_in/admission.ts), not the upstream's.
    if (error.includes("is not allowed to sign in here")) return "refused";
    return status === "expired" || error.includes("expired") ? "expired" : "failed";
  }

  function schedulePoll() {
    if (!finished) pollTimer = window.setTimeout(poll, data.pollIntervalMs);
  }

  async function poll() {
    if (finished) return;
    /** @type {unknown} */
    let json;
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
      json = await response.json();
    } catch {
      schedulePoll(); // network or parse error: keep polling
      return;
    }
    /** @type {PollAnswer} */
    const body = json !== null && typeof json === "object" ? json : {};
    const status = body.status;
    if (status === "complete") {
      complete(body);
    } else if (status === "failed" || status === "expired") {
      finish();
      const error = body.error === undefined ? "unknown error" : String(body.error);
      const reason = failureReason(error, status);
      setStatus(
        "error",
        (reason === "refused" ? "Sign-in refused by this service: " : "Authentication failed: ") +
          error,
      );
      explainFailure(reason);
    } else {
      schedulePoll(); // pending, or an answer without a status
    }
  }

  /**
   * The client's redirect URI with the code, state and issuer; null when it is no URL or its
   * scheme is one the server calls unsafe.
   * @param {string} raw
   * @param {PollAnswer} body
   * @returns {string | null}
   */
  function redirectTarget(raw, body) {
    let url;
    try {
      url = new URL(raw);
    } catch {
      return null;
    }
    if (data.blockedSchemes.includes(url.protocol)) return null;
    url.searchParams.set("code", String(body.code ?? ""));
    if (typeof body.state === "string") url.searchParams.set("state", body.state);
    if (typeof data.issuer === "string" && data.issuer !== "") {
      url.searchParams.set("iss", data.issuer); // RFC 9207
    }
    return url.href;
  }

  /** @param {PollAnswer} body */
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
    window.setTimeout(() => location.assign(target), data.redirectDelayMs);
  }

  // ---- copy ----
  let copyTimer = 0;
  /**
   * @param {string} label
   * @param {string} announcement
   */
  function copyDone(label, announcement) {
    copyLabel.textContent = label;
    copyFeedback.textContent = announcement;
    clearTimeout(copyTimer);
    copyTimer = window.setTimeout(() => {
      copyLabel.textContent = "Copy";
      copyFeedback.textContent = "";
    }, COPY_FEEDBACK_MS);
  }

  function selectCode() {
    const selection = window.getSelection();
    if (selection === null) return;
    const range = document.createRange();
    range.selectNodeContents(codeEl);
    selection.removeAllRanges();
    selection.addRange(range);
  }

  byId("copy-button").addEventListener("click", async () => {
    const code = (codeEl.textContent ?? "").trim();
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
  tickTimer = window.setInterval(tick, data.countdownTickMs);
  pollTimer = window.setTimeout(poll, data.pollIntervalMs);
})();
