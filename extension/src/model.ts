/**
 * The status model: polls the lakesession server extension and keeps a clock for countdowns.
 *
 * The server answers with what the running kernels' sessions published (secret-free
 * `Session.status()` documents); time-to-live values are computed here from `expires_at`
 * so they count down every second between polls.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

export interface IIdentity {
  principal?: string | null;
  issuer?: string | null;
  expires_at?: number | null;
  kind?: string | null;
}

export interface ICredentialRow {
  engine: string;
  table: string;
  state: string;
  prefix?: string | null;
  mode?: string | null;
  expires_at?: number | null;
  refreshes?: number | null;
  last_error?: string | null;
}

export interface ISessionStatus {
  state: string;
  catalog_name?: string | null;
  uri?: string | null;
  identity?: IIdentity | null;
  spark?: boolean;
  credentials: ICredentialRow[];
  error?: string;
}

export interface IKernelStatus {
  kernel_id: string;
  kernel_name?: string | null;
  path?: string | null;
  updated?: number;
  sessions: ISessionStatus[];
}

export interface IStatusResponse {
  time: number;
  kernels: IKernelStatus[];
}

export const STATUS_ROUTE = 'lakesession/status';

/** Seconds as `1h 02m 03s` / `4m 05s` / `6s`; `expired` at zero; `—` when unknown. */
export function formatTTL(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '—';
  }
  if (seconds <= 0) {
    return 'expired';
  }
  const s = Math.floor(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  const pad = (n: number): string => (n < 10 ? `0${n}` : `${n}`);
  if (h > 0) {
    return `${h}h ${pad(m)}m ${pad(sec)}s`;
  }
  if (m > 0) {
    return `${m}m ${pad(sec)}s`;
  }
  return `${sec}s`;
}

export class StatusModel {
  constructor(
    settings: ServerConnection.ISettings = ServerConnection.makeSettings(),
    pollMs = 3000
  ) {
    this._settings = settings;
    this._pollMs = pollMs;
  }

  /** Emitted after each poll (new data or a new error). */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Emitted every second, for countdowns. */
  get ticked(): ISignal<this, void> {
    return this._ticked;
  }

  get status(): IStatusResponse | null {
    return this._status;
  }

  get error(): string | null {
    return this._error;
  }

  /** The server's clock now, in epoch seconds (browser clock corrected by the last poll). */
  now(): number {
    return Date.now() / 1000 + this._offset;
  }

  /** Seconds until `expiresAt` (epoch seconds), or null when unknown. */
  secondsLeft(expiresAt: number | null | undefined): number | null {
    if (expiresAt === null || expiresAt === undefined) {
      return null;
    }
    return Math.max(0, expiresAt - this.now());
  }

  /** All sessions of all running kernels, with their kernel. */
  sessions(): Array<{ kernel: IKernelStatus; session: ISessionStatus }> {
    const out: Array<{ kernel: IKernelStatus; session: ISessionStatus }> = [];
    for (const kernel of this._status?.kernels ?? []) {
      for (const session of kernel.sessions ?? []) {
        out.push({ kernel, session });
      }
    }
    return out;
  }

  start(): void {
    if (this._pollTimer !== null) {
      return;
    }
    void this.refresh();
    this._pollTimer = window.setInterval(() => void this.refresh(), this._pollMs);
    this._tickTimer = window.setInterval(() => this._ticked.emit(), 1000);
  }

  dispose(): void {
    if (this._pollTimer !== null) {
      window.clearInterval(this._pollTimer);
      this._pollTimer = null;
    }
    if (this._tickTimer !== null) {
      window.clearInterval(this._tickTimer);
      this._tickTimer = null;
    }
    Signal.clearData(this);
  }

  async refresh(): Promise<void> {
    const url = URLExt.join(this._settings.baseUrl, STATUS_ROUTE);
    try {
      const response = await ServerConnection.makeRequest(url, { method: 'GET' }, this._settings);
      if (!response.ok) {
        throw new Error(`${response.status} ${response.statusText}`);
      }
      const data = (await response.json()) as IStatusResponse;
      this._offset = data.time - Date.now() / 1000;
      this._status = data;
      this._error = null;
    } catch (reason) {
      this._error = `lakesession status unavailable: ${String(reason)}`;
    }
    this._changed.emit();
  }

  private _settings: ServerConnection.ISettings;
  private _pollMs: number;
  private _pollTimer: number | null = null;
  private _tickTimer: number | null = null;
  private _status: IStatusResponse | null = null;
  private _error: string | null = null;
  private _offset = 0;
  private _changed = new Signal<this, void>(this);
  private _ticked = new Signal<this, void>(this);
}
