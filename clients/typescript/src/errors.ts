/** Every error of this package. */
export class AirlockError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The runtime's identity or the API's address is missing or unsafe. */
export class ConfigError extends AirlockError {}

/** A non-success answer of the Sandbox API, with the operator's code, reason and message. */
export class APIError extends AirlockError {
  readonly path: string;
  readonly status: number;
  readonly code: string;
  readonly reason: string;
  readonly detail: string;
  /** For a 503: seconds to wait before calling again. */
  readonly retryAfter: number;

  constructor(path: string, status: number, code = "", detail = "", reason = "", retryAfter = 0, text = "") {
    if (!text) {
      text = `${path} answered ${status}`;
      if (code) text += ` ${code}`;
      if (reason && !detail.includes(reason)) text += ` (${reason})`;
      if (detail) text += `: ${detail}`;
    }
    super(text);
    this.path = path;
    this.status = status;
    this.code = code;
    this.reason = reason;
    this.detail = detail;
    this.retryAfter = retryAfter;
  }
}

/** 401: no token, or one TokenReview does not accept (audience, expiry). */
export class Unauthorized extends APIError {}
/** 403: a valid token that is not the AgentRuntime's ServiceAccount. */
export class Forbidden extends APIError {}
/** 404: the runtime, its registry entry or the class does not exist. */
export class NotFound extends APIError {}
/** 409: disabled (the runtime may hold no sandbox), conflict, or not_bound (renew). */
export class Conflict extends APIError {}
/** 429: a limit was reached (reason MaxPerSession, MaxInstances, ...): not queued. */
export class Refused extends APIError {}
/** 502: the claim and its one replacement failed; reason is the operator's. */
export class Failed extends APIError {}
/** 503: the operator cannot answer now; acquire calls again after retryAfter. */
export class Unavailable extends APIError {}

export const errorClasses: Record<number, typeof APIError> = {
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  429: Refused,
  502: Failed,
  503: Unavailable,
};

/** The sandbox was not Bound within the deadline; phase is the last 202's. */
export class AcquireTimeout extends AirlockError {
  readonly handle: string;
  readonly phase: string;
  readonly reason: string;

  constructor(handle: string, phase: string, reason = "", detail = "") {
    let text = `sandbox ${handle} is still ${phase || "unanswered"}`;
    if (reason) text += ` (${reason})`;
    text += " at the deadline";
    if (detail) text += `: ${detail}`;
    super(text);
    this.handle = handle;
    this.phase = phase;
    this.reason = reason;
  }
}
