// Azure Personalizer's own JavaScript SDK (@azure/cognitiveservices-personalizer 2.0.1 on
// @azure/ms-rest-js) against the server's Personalizer-compatible REST API: an application
// written for Personalizer must work here by changing only its endpoint and its key.
//
//   1. rank (context and action features, excludedActions, an explicit eventId,
//      deferActivation), reward and activate answer as Personalizer does; rank without an
//      eventId gets a generated one.
//   2. a wrong key is refused with 401 and the error code "Unauthorized", as the SDK surfaces it.
//   3. bad requests are refused with 400 (or 404 for an unknown event) and Personalizer's error
//      body, which the SDK parses into RestError.code and RestError.body.
//   4. a categorical task (the best action depends on the device) is learned through the SDK.
//
// usage: PERSONALIZER_ENDPOINT=http://127.0.0.1:PORT PERSONALIZER_KEY=KEY node sdk_test.mjs
// (run by sdk_test.sh, which starts the server). Prints one line per check; exits 1 on a failure.
import { PersonalizerClient } from "@azure/cognitiveservices-personalizer";
import { ApiKeyCredentials, RestError } from "@azure/ms-rest-js";

const endpoint = process.env.PERSONALIZER_ENDPOINT;
const key = process.env.PERSONALIZER_KEY;
if (!endpoint || !key) {
  console.error("FAIL: set PERSONALIZER_ENDPOINT (http://HOST:PORT) and PERSONALIZER_KEY");
  process.exit(2);
}

// The whole run is bounded: a hung call must not hang the test (sdk_test.sh has its own bound).
const kTotalSeconds = 90;
const kCallTimeoutMs = 10_000;  // per call, through the SDK's own `timeout` option
setTimeout(() => {
  console.error(`FAIL: the checks did not finish within ${kTotalSeconds} s`);
  process.exit(1);
}, kTotalSeconds * 1000).unref();
const call = { timeout: kCallTimeoutMs };

const credentials = (k) => new ApiKeyCredentials({ inHeader: { "Ocp-Apim-Subscription-Key": k } });
// As an application would build it (the SDK's default pipeline, retries included).
const client = new PersonalizerClient(credentials(key), endpoint);
// For calls that must fail: no retries, so an error answers at once and exactly once.
const strict = new PersonalizerClient(credentials(key), endpoint, { noRetryPolicy: true });

class CheckFailed extends Error {}
function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}
const show = (x) => JSON.stringify(x);
// What the SDK gives for a failed call, for messages.
const describeError = (e) =>
  e instanceof RestError
    ? `RestError statusCode=${e.statusCode} code=${e.code} body=${show(e.body)} message=${e.message}`
    : `${e && e.name}: ${e && e.message}`;

// Awaits `promise`, which must fail with a RestError of `status` whose code (RestError.code, from
// the error body the SDK parsed) is `code`, and whose message contains `text`.
async function expectRestError(what, promise, status, code, text) {
  let result;
  try {
    result = await promise;
  } catch (e) {
    check(e instanceof RestError, `${what}: expected a RestError, got ${describeError(e)}`);
    check(e.statusCode === status,
          `${what}: expected HTTP ${status}, got ${describeError(e)}`);
    check(e.code === code, `${what}: expected the error code "${code}", got ${describeError(e)}`);
    // The SDK deserializes Personalizer's {"error": {"code", "message"}} with its ErrorResponse
    // mapper into RestError.body.
    check(e.body && e.body.error && e.body.error.code === code &&
              typeof e.body.error.message === "string" && e.body.error.message.includes(text),
          `${what}: expected the body {"error": {"code": "${code}", "message": "...${text}..."}}, ` +
              `got ${describeError(e)}`);
    return e;
  }
  throw new CheckFailed(`${what}: expected HTTP ${status} ${code}, but it succeeded: ` +
                        show(result && result._response ? result._response.bodyAsText : result));
}

// A raw request to the same API, for bodies the SDK refuses to send (it validates required
// fields and types client-side, before any request).
async function rawPost(path, body) {
  const res = await fetch(`${endpoint}/personalizer/v1.0${path}`, {
    method: "POST",
    headers: { "Ocp-Apim-Subscription-Key": key, "Content-Type": "application/json" },
    body,
    signal: AbortSignal.timeout(kCallTimeoutMs),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // left null: the check below names the text
  }
  return { status: res.status, text, json };
}
async function expectRaw(what, path, body, status, code, text) {
  const r = await rawPost(path, body);
  check(r.status === status && r.json && r.json.error && r.json.error.code === code &&
            typeof r.json.error.message === "string" && r.json.error.message.includes(text),
        `${what}: expected HTTP ${status} with {"error": {"code": "${code}", "message": ` +
            `"...${text}..."}}, got HTTP ${r.status} ${r.text}`);
}

// Checks a rank response: every action ranked once, the excluded ones last with probability 0,
// probabilities summing to 1, the reward action first.
function checkRanking(what, response, actions, excluded) {
  const ranking = response.ranking;
  check(Array.isArray(ranking), `${what}: no ranking in ${show(response)}`);
  const ids = ranking.map((r) => r.id);
  check(ids.length === actions.length && new Set(ids).size === ids.length &&
            actions.every((a) => ids.includes(a.id)),
        `${what}: the ranking must hold each of ${show(actions.map((a) => a.id))} once: ${show(ranking)}`);
  const tail = ids.slice(ids.length - excluded.length);
  check(excluded.every((id) => tail.includes(id)),
        `${what}: excluded actions ${show(excluded)} must be ranked last: ${show(ranking)}`);
  for (const r of ranking) {
    check(typeof r.probability === "number" && r.probability >= 0 && r.probability <= 1,
          `${what}: probability of ${r.id} is not in [0, 1]: ${show(ranking)}`);
    if (excluded.includes(r.id)) {
      check(r.probability === 0, `${what}: excluded ${r.id} has probability ${r.probability}`);
    }
  }
  const sum = ranking.reduce((s, r) => s + r.probability, 0);
  check(Math.abs(sum - 1) < 1e-6, `${what}: probabilities sum to ${sum}, not 1: ${show(ranking)}`);
  check(response.rewardActionId === ranking[0].id,
        `${what}: rewardActionId ${show(response.rewardActionId)} is not ranking[0].id ` +
            `${show(ranking[0].id)}`);
  check(!excluded.includes(response.rewardActionId),
        `${what}: rewardActionId ${response.rewardActionId} is excluded`);
}

const articles = [
  { id: "news-article", features: [{ topic: "politics", length: 700 }, { editor: { pick: true } }] },
  { id: "sports-article", features: [{ topic: "sports", length: 300 }] },
  { id: "recipe", features: [{ topic: "food", length: 250 }, { tags: ["vegan", "quick"] }] },
  { id: "opinion", features: [{ topic: "politics", length: 1200 }] },
];

async function rankRewardActivate() {
  const eventId = `sdk-event-${process.pid}-${Date.now()}`;
  const excluded = ["opinion"];
  const ranked = await client.rank(
      {
        contextFeatures: [{ timeOfDay: "Morning" }, { device: { os: "ios" } }],
        actions: articles,
        excludedActions: excluded,
        eventId,
      },
      call);
  check(ranked._response.status === 201, `rank: expected HTTP 201, got ${ranked._response.status}`);
  checkRanking("rank", ranked, articles, excluded);
  check(ranked.eventId === eventId, `rank: eventId ${show(ranked.eventId)} is not the one sent, ${eventId}`);
  const rewarded = await client.events.reward(eventId, { value: 1 }, call);
  check(rewarded._response.status === 204, `reward: expected HTTP 204, got ${rewarded._response.status}`);
  const activated = await client.events.activate(eventId, call);
  check(activated._response.status === 204,
        `activate: expected HTTP 204, got ${activated._response.status}`);

  // Deferred: the reward is held until the event is activated (the server's own tests check
  // what is learned; here, that the SDK's deferActivation and activate go through).
  const deferredId = `${eventId}-deferred`;
  const deferred = await client.rank(
      { contextFeatures: [{ timeOfDay: "Noon" }], actions: articles, eventId: deferredId,
        deferActivation: true },
      call);
  check(deferred._response.status === 201 && deferred.eventId === deferredId,
        `rank with deferActivation: expected HTTP 201 for ${deferredId}, got ` +
            `${deferred._response.status} ${show(deferred.eventId)}`);
  await client.events.reward(deferredId, { value: 0.5 }, call);
  const activatedLater = await client.events.activate(deferredId, call);
  check(activatedLater._response.status === 204,
        `activate a deferred event: expected HTTP 204, got ${activatedLater._response.status}`);

  const generated = await client.rank({ contextFeatures: [{ timeOfDay: "Evening" }], actions: articles },
                                      call);
  checkRanking("rank without an eventId", generated, articles, []);
  check(typeof generated.eventId === "string" && generated.eventId.length > 0 &&
            generated.eventId !== eventId,
        `rank without an eventId: expected a generated eventId, got ${show(generated.eventId)}`);
  await client.events.reward(generated.eventId, { value: 0.25 }, call);
  return `ranked ${ranked.ranking.map((r) => `${r.id}:${r.probability.toFixed(3)}`).join(" ")}, ` +
         `rewarded and activated ${eventId}; deferred, rewarded and activated ${deferredId}; ` +
         `generated eventId ${generated.eventId}`;
}

async function wrongKey() {
  const intruder = new PersonalizerClient(credentials(`not-${key}`), endpoint, { noRetryPolicy: true });
  const e = await expectRestError("rank with a wrong key",
                                  intruder.rank({ actions: articles.slice(0, 2) }, call), 401,
                                  "Unauthorized", "access denied");
  await expectRestError("reward with a wrong key",
                        intruder.events.reward("any-event", { value: 1 }, call), 401, "Unauthorized",
                        "access denied");
  await expectRestError("activate with a wrong key", intruder.events.activate("any-event", call),
                        401, "Unauthorized", "access denied");
  return `rank, reward and activate: RestError statusCode=${e.statusCode} code=${e.code}`;
}

async function badRequests() {
  // Through the SDK: it sends these bodies as they are.
  await expectRestError("rank with no actions", strict.rank({ actions: [] }, call), 400, "BadRequest",
                        "actions must not be empty");
  await expectRestError("rank with a repeated action id",
                        strict.rank({ actions: [articles[0], articles[1], articles[0]] }, call), 400,
                        "BadRequest", "repeats");
  await expectRestError("rank excluding an action that is not offered",
                        strict.rank({ actions: articles, excludedActions: ["no-such-action"] }, call),
                        400, "BadRequest", "no-such-action");
  await expectRestError("rank excluding every action",
                        strict.rank({ actions: articles.slice(0, 2),
                                      excludedActions: articles.slice(0, 2).map((a) => a.id) }, call),
                        400, "BadRequest", "excludedActions");
  await expectRestError("reward for an unknown event",
                        strict.events.reward("no-such-event", { value: 1 }, call), 404,
                        "ResourceNotFound", "no-such-event");
  await expectRestError("activate for an unknown event", strict.events.activate("no-such-event", call),
                        404, "ResourceNotFound", "no-such-event");

  // The SDK refuses these before sending (its mappers mark actions and value required), so they go
  // raw to the same endpoint; first make sure the SDK really refuses them, without a status.
  for (const [what, attempt] of [
    ["rank without actions", () => strict.rank({ contextFeatures: [{ a: 1 }] }, call)],
    ["reward without a value", () => strict.events.reward("no-such-event", {}, call)],
  ]) {
    let refused = null;
    try {
      await attempt();
    } catch (e) {
      refused = e;
    }
    check(refused && refused.statusCode === undefined && /cannot be null or undefined/.test(refused.message),
          `${what}: expected the SDK to refuse it client-side, got ${refused ? describeError(refused) : "success"}`);
  }
  await expectRaw("raw rank without actions", "/rank", '{"contextFeatures": [{"a": 1}]}', 400,
                  "BadRequest", "actions must not be empty");
  const open = await client.rank({ actions: articles.slice(0, 2) }, call);
  await expectRaw("raw reward without a value", `/events/${encodeURIComponent(open.eventId)}/reward`,
                  "{}", 400, "BadRequest", "value is missing");
  await expectRaw("raw rank with malformed JSON", "/rank", '{"actions": [', 400, "BadRequest",
                  "not a valid request");
  return "SDK: empty actions, repeated id, bad excludedActions -> 400 BadRequest; unknown event " +
         "-> 404 ResourceNotFound; raw: no actions, no reward value, malformed JSON -> 400";
}

async function learnsACategoricalTask() {
  const devices = ["phone", "tablet", "desktop"];
  const items = ["news", "video", "game"];  // items[i] is the best for devices[i]
  const actions = items.map((kind, i) => ({
    id: kind,
    features: [{ kind }, { tags: [i === 2 ? "interactive" : "passive"] }],
  }));
  const kRounds = 240, kLate = 60, kBest = 0.9, kOther = 0.2;
  let late = 0, lateBest = 0;
  for (let round = 0; round < kRounds; ++round) {
    const device = round % devices.length;
    const ranked = await client.rank(
        {
          contextFeatures: [{ device: { type: devices[device], inches: device === 0 ? 6 : 10 + device * 7 } }],
          actions,
        },
        call);
    const chosen = items.indexOf(ranked.rewardActionId);
    check(chosen >= 0, `round ${round}: rewardActionId ${show(ranked.rewardActionId)} is not an action`);
    const reward = chosen === device ? kBest : kOther;
    await client.events.reward(ranked.eventId, { value: reward }, call);
    if (round >= kRounds - kLate) {
      late += reward;
      lateBest += kBest;
    }
  }
  const ratio = late / lateBest;
  const figure = `last ${kLate} of ${kRounds} rounds: reward ${late.toFixed(1)} of the best ` +
                 `${lateBest.toFixed(1)} (${(100 * ratio).toFixed(1)}%, needs >= 80%)`;
  check(ratio >= 0.8, `the categorical task was not learned: ${figure}`);
  return figure;
}

const checks = [
  ["1. rank, reward, activate", rankRewardActivate],
  ["2. wrong key", wrongKey],
  ["3. bad requests", badRequests],
  ["4. learning", learnsACategoricalTask],
];
let failures = 0;
for (const [name, run] of checks) {
  const start = Date.now();
  try {
    const summary = await run();
    console.log(`ok   ${name} (${Date.now() - start} ms): ${summary}`);
  } catch (e) {
    ++failures;
    console.log(`FAIL ${name}: ${e instanceof CheckFailed ? e.message : describeError(e)}`);
  }
}
console.log(failures === 0 ? `all ${checks.length} SDK checks passed`
                           : `${failures} of ${checks.length} SDK checks failed`);
process.exit(failures === 0 ? 0 : 1);
