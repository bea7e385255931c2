/**
 * The supervisor's event collector (`xinference/core/event.py`, `EventCollectorActor`; v3.2.0+61,
 * commit 7ecec16b6): per model uid, the last 100 events (`MAX_EVENT_COUNT_PER_MODEL`, a deque that
 * drops the oldest), each `{event_type: "INFO" | "WARNING" | "ERROR", event_ts: <whole seconds>,
 * event_content: <text>}`, oldest first. Nothing is ever removed otherwise: a terminated model's
 * events stay, and a uid launched again adds to them. A uid with no event answers `[]`.
 *
 * Who reports what, at that commit:
 * - `core/worker.py`, `launch_builtin_model`: INFO "Launch model", once per replica a worker is asked
 *   to launch, before the model is created (also when `recover_model` relaunches a dead one);
 * - `core/worker.py`, `terminate_model`: INFO "Terminate model", per replica it tears down (a DELETE,
 *   a replica's DELETE, and `_clean_up_failed_launch` when a load fails in `wait_for_load`);
 * - `core/worker.py`, `recover_sub_pool`: WARNING "Recreate model" before recreating a dead model,
 *   only while a bounded XINFERENCE_MODEL_ACTOR_AUTO_RECOVER_LIMIT lasts (the default, unbounded,
 *   reports nothing there: only the relaunch's "Launch model");
 * - `api/restful_api.py`, `_report_error_event` (through `api/utils.py`, `require_model`, and each
 *   inference route's except): ERROR with the error's text, under the uid the request named, for a
 *   model not found (400/404, whatever the uid) or failing (500), and a generation that fails; a
 *   model still loading (503) is not reported.
 * A launch whose load fails reports no ERROR: its error is the replica's `error_message` in the
 * instance list (`core/supervisor.py`, `_launch_one_model`).
 * Events are kept under the model's uid: a replica's `<uid>-rep<n>` is reported as `<uid>`
 * (`core/utils.py`, `parse_replica_model_uid`).
 */

export type EngineEventType = 'INFO' | 'WARNING' | 'ERROR';

export interface EngineEvent {
  event_type: EngineEventType;
  event_ts: number;
  event_content: string;
}

const MAX_EVENT_COUNT_PER_MODEL = 100;

export class EngineEventCollector {
  readonly #byUid = new Map<string, EngineEvent[]>();

  /** `report_event`: appended under the uid (the reporter passes a replica's model uid, without its `-rep<n>`). */
  report(modelUid: string, type: EngineEventType, content: string): void {
    const events = this.#byUid.get(modelUid) ?? [];
    events.push({ event_type: type, event_ts: Math.floor(Date.now() / 1000), event_content: content });
    if (events.length > MAX_EVENT_COUNT_PER_MODEL) events.splice(0, events.length - MAX_EVENT_COUNT_PER_MODEL);
    this.#byUid.set(modelUid, events);
  }

  /** `get_model_events` (`GET /v1/models/{uid}/events`): the uid's events, oldest first; `[]` for a uid with none. */
  of(uid: string): EngineEvent[] {
    return (this.#byUid.get(uid) ?? []).map((event) => ({ ...event }));
  }
}
