import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

// HttpAgent 1.0.0 has no connect(), so its connectAgent() does nothing. This one streams
// the thread (/connect), or one run of it from its start when given
// connectAgent({ forwardedProps: { resumeRunId } }). `url` is the server's /agui.
export class ThreadstoreAgent extends HttpAgent {
  connect({ threadId, forwardedProps }) {
    const runId = forwardedProps?.resumeRunId;
    const path = runId ? `runs/${encodeURIComponent(runId)}/events?snapshots=true` : "connect";
    const url = `${this.url}/threads/${encodeURIComponent(threadId)}/${path}`;
    this.abortController = new AbortController(); // the one abortRun() aborts
    const headers = { ...this.headers, Accept: "text/event-stream" };
    const request = () => this.fetch(url, { headers, signal: this.abortController.signal });
    return transformHttpEventStream(runHttpRequest(request), this.debugLogger);
  }
}
