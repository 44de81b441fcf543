// The official AG-UI client against a running threadstore server (demo agent).
//
// Usage: node conversation.mjs http://127.0.0.1:PORT
//
// Two clients hold the same two-turn conversation, each on its own thread: one never
// drops its stream; the other drops it mid-run in both turns, reconnects through
// /connect after the first and resumes the run (?snapshots=true) after the second.
// A third client opens the second thread afresh, as a page load would. Every stream
// goes through the client's own pipeline (schema enforcement, event-order verification).
// Prints one JSON report on stdout for tests/test_agui_client.py to check.

import { randomUUID } from "node:crypto";
import { runHttpRequest, transformHttpEventStream, verifyEvents } from "@ag-ui/client";
import { PROTOCOL_VERSION } from "@ag-ui/core";
import { ThreadstoreAgent } from "./threadstore-agent.mjs";

const base = process.argv[2];
// Arithmetic only: the demo answers it the same way every time, apart from ids.
const QUESTIONS = ["What is 12 * 7 + 3?", "And 6 * 6?"];

function newAgent(threadId) {
  return new ThreadstoreAgent({ url: `${base}/agui`, threadId });
}

function ask(agent, turn) {
  agent.addMessage({ id: `${agent.threadId}-q${turn}`, role: "user", content: QUESTIONS[turn] });
}

/** A subscriber noting each stream's RUN_STARTED in `log`. */
function noteStarts(log) {
  return {
    onRunStartedEvent: ({ event }) => {
      log.push({ runId: event.runId, protocolVersion: event.protocolVersion ?? null });
    },
  };
}

/** A subscriber that drops the stream once `count` events of `type` have arrived. */
function dropAfter(agent, type, count) {
  let seen = 0;
  return {
    onEvent: ({ event }) => {
      if (event.type === type && ++seen === count) agent.abortRun();
    },
  };
}

function snapshotOf(agent) {
  return { messages: structuredClone(agent.messages), state: structuredClone(agent.state) };
}

/** What the client's verification says of the plain resume stream (after=3): its error. */
async function plainResumeVerdict(threadId, runId) {
  const url = `${base}/agui/threads/${threadId}/runs/${runId}/events?after=3`;
  const init = { headers: { Accept: "text/event-stream" } };
  const events$ = verifyEvents()(transformHttpEventStream(runHttpRequest(() => fetch(url, init))));
  return new Promise((resolve) => {
    events$.subscribe({
      error: (error) => resolve(error.message),
      complete: () => resolve(null),
    });
  });
}

async function steadyClient() {
  const agent = newAgent(`steady-${randomUUID()}`);
  const starts = [];
  ask(agent, 0);
  await agent.runAgent({}, noteStarts(starts));
  const afterFirstTurn = snapshotOf(agent);
  ask(agent, 1);
  await agent.runAgent({}, noteStarts(starts));
  return { threadId: agent.threadId, starts, afterFirstTurn, ...snapshotOf(agent) };
}

async function droppingClient() {
  const agent = newAgent(`dropped-${randomUUID()}`);
  const runs = [randomUUID(), randomUUID()];
  const starts = [];

  // Turn 1: the stream drops in the middle of the reasoning; reconnect through /connect.
  ask(agent, 0);
  const dropped1 = dropAfter(agent, "REASONING_MESSAGE_CONTENT", 3);
  await agent.runAgent({ runId: runs[0] }, { ...noteStarts(starts), ...dropped1 });
  const afterFirstDrop = snapshotOf(agent);
  const connectStarts = [];
  await agent.connectAgent({}, noteStarts(connectStarts));
  const afterFirstTurn = snapshotOf(agent);

  // Turn 2: the stream drops in the middle of the tool call; resume that run.
  ask(agent, 1);
  const dropped2 = dropAfter(agent, "TOOL_CALL_ARGS", 2);
  await agent.runAgent({ runId: runs[1] }, { ...noteStarts(starts), ...dropped2 });
  const afterSecondDrop = snapshotOf(agent);
  const plainResume = await plainResumeVerdict(agent.threadId, runs[1]);
  const resumeStarts = [];
  const resume = { forwardedProps: { resumeRunId: runs[1] } };
  await agent.connectAgent(resume, noteStarts(resumeStarts));

  return {
    threadId: agent.threadId,
    runIds: runs,
    starts,
    afterFirstDrop,
    connectStarts,
    afterFirstTurn,
    afterSecondDrop,
    plainResume,
    resumeStarts,
    ...snapshotOf(agent),
  };
}

async function freshClient(threadId) {
  const agent = newAgent(threadId);
  const starts = [];
  await agent.connectAgent({}, noteStarts(starts));
  return { starts, ...snapshotOf(agent) };
}

const [steady, dropped] = await Promise.all([steadyClient(), droppingClient()]);
const fresh = await freshClient(dropped.threadId);
process.stdout.write(JSON.stringify({ protocolVersion: PROTOCOL_VERSION, steady, dropped, fresh }));
