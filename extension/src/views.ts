/**
 * The status-bar item and the side panel. Both render with DOM text nodes only (no HTML from
 * the server is ever interpreted) and re-render countdowns every second.
 */
import { Widget } from '@lumino/widgets';

import { formatTTL, ICredentialRow, ISessionStatus, StatusModel } from './model';

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** A countdown element: its text is recomputed from `data-expires-at` on every tick. */
function ttl(model: StatusModel, expiresAt: number | null | undefined, role: string): HTMLElement {
  const node = el('span', 'lakesession-ttl');
  node.dataset.role = role;
  if (expiresAt !== null && expiresAt !== undefined) {
    node.dataset.expiresAt = String(expiresAt);
  }
  updateTTL(model, node);
  return node;
}

function updateTTL(model: StatusModel, node: HTMLElement): void {
  const raw = node.dataset.expiresAt;
  const left = raw === undefined ? null : model.secondsLeft(Number(raw));
  node.textContent = formatTTL(left);
  node.dataset.secondsLeft = left === null ? '' : String(Math.floor(left));
  node.classList.toggle('lakesession-ttl-low', left !== null && left < 300);
}

function updateAll(model: StatusModel, root: HTMLElement): void {
  root.querySelectorAll<HTMLElement>('.lakesession-ttl').forEach(n => updateTTL(model, n));
}

function principalOf(session: ISessionStatus): string {
  return session.identity?.principal ?? (session.state === 'starting' ? 'starting…' : 'unknown');
}

/** The status-bar item: `lakesession: demo · token 59m 58s · 2 tables`. Click opens the panel. */
export class StatusItem extends Widget {
  constructor(model: StatusModel, onClick: () => void) {
    super();
    this._model = model;
    this.addClass('lakesession-statusbar-item');
    this.node.title = 'lakesession: identity and storage credentials of the running kernels';
    this.node.addEventListener('click', onClick);
    model.changed.connect(this.render, this);
    model.ticked.connect(() => updateAll(this._model, this.node), this);
    this.render();
  }

  render(): void {
    const node = this.node;
    node.textContent = '';
    const sessions = this._model.sessions();
    node.appendChild(el('span', 'lakesession-statusbar-label', 'lakesession'));
    if (sessions.length === 0) {
      node.appendChild(el('span', 'lakesession-statusbar-empty', ': no session'));
      return;
    }
    const first = sessions[0].session;
    node.appendChild(document.createTextNode(': '));
    node.appendChild(el('span', 'lakesession-principal', principalOf(first)));
    node.appendChild(document.createTextNode(' · token '));
    node.appendChild(ttl(this._model, first.identity?.expires_at, 'token-ttl'));
    const tables = new Set<string>();
    sessions.forEach(s => s.session.credentials.forEach(c => tables.add(c.table)));
    node.appendChild(document.createTextNode(` · ${tables.size} table${tables.size === 1 ? '' : 's'}`));
    if (sessions.length > 1) {
      node.appendChild(document.createTextNode(` · ${sessions.length} sessions`));
    }
  }

  private _model: StatusModel;
}

/** The side panel: per kernel and session, identity, token expiry and each table's credentials. */
export class StatusPanel extends Widget {
  constructor(model: StatusModel) {
    super();
    this._model = model;
    this.addClass('lakesession-panel');
    model.changed.connect(this.render, this);
    model.ticked.connect(() => updateAll(this._model, this.node), this);
    this.render();
  }

  render(): void {
    const node = this.node;
    node.textContent = '';
    node.appendChild(el('h2', 'lakesession-panel-title', 'lakesession'));
    if (this._model.error) {
      node.appendChild(el('div', 'lakesession-error', this._model.error));
    }
    const sessions = this._model.sessions();
    if (sessions.length === 0) {
      node.appendChild(
        el('p', 'lakesession-empty', 'No lakesession session in the running kernels yet: run lakesession.connect() or lakesession.spark() in a notebook.')
      );
      return;
    }
    for (const { kernel, session } of sessions) {
      node.appendChild(this._session(kernel.path ?? kernel.kernel_id, session));
    }
  }

  private _session(where: string, session: ISessionStatus): HTMLElement {
    const box = el('section', 'lakesession-session');
    box.dataset.state = session.state;
    box.appendChild(el('div', 'lakesession-kernel', where));
    const dl = el('dl', 'lakesession-identity');
    const row = (label: string, value: HTMLElement | string): void => {
      dl.appendChild(el('dt', '', label));
      const dd = el('dd', '');
      dd.appendChild(typeof value === 'string' ? document.createTextNode(value) : value);
      dl.appendChild(dd);
    };
    row('principal', el('span', 'lakesession-principal', principalOf(session)));
    row('issuer', session.identity?.issuer ?? '—');
    row('token expires in', ttl(this._model, session.identity?.expires_at, 'token-ttl'));
    row('catalog', `${session.catalog_name ?? '—'} ${session.uri ? `(${session.uri})` : ''}`.trim());
    row('state', session.error ? `${session.state}: ${session.error}` : session.state);
    box.appendChild(dl);
    box.appendChild(this._credentials(session.credentials));
    return box;
  }

  private _credentials(rows: ICredentialRow[]): HTMLElement {
    if (rows.length === 0) {
      return el('p', 'lakesession-empty', 'No table credentials yet.');
    }
    const table = el('table', 'lakesession-credentials');
    const head = el('tr', '');
    [
      ['engine', 'python: pyiceberg in the kernel; spark: through the gateway'],
      ['table', ''],
      ['state', 'valid, refreshing, revoked, failed, expired'],
      ['TTL', 'time until the vended storage credential expires'],
      ['↻', 'refreshes so far']
    ].forEach(([h, tip]) => {
      const th = el('th', '', h);
      if (tip) {
        th.title = tip;
      }
      head.appendChild(th);
    });
    table.appendChild(head);
    for (const r of rows) {
      const tr = el('tr', 'lakesession-credential');
      tr.dataset.table = r.table;
      tr.dataset.state = r.state;
      tr.appendChild(el('td', '', r.engine));
      tr.appendChild(el('td', 'lakesession-table', r.table));
      const state = el('td', `lakesession-state lakesession-state-${r.state}`, r.state);
      if (r.last_error) {
        state.title = r.last_error;
      }
      tr.appendChild(state);
      const cell = el('td', '');
      cell.appendChild(ttl(this._model, r.expires_at, 'credential-ttl'));
      tr.appendChild(cell);
      tr.appendChild(el('td', '', String(r.refreshes ?? 0)));
      table.appendChild(tr);
    }
    return table;
  }

  private _model: StatusModel;
}
