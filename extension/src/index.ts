/**
 * lakesession for JupyterLab: a status-bar item and a side panel showing, for the running
 * kernels' lakesession sessions, the principal, the token expiry and each table's storage
 * credential state and TTL. Data comes from the `lakesession.lab` server extension.
 */
import { ILabShell, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';

import { StatusModel } from './model';
import { StatusItem, StatusPanel } from './views';

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
  '<path class="jp-icon3" fill="#616161" d="M1 11c1.5 0 1.5 1 3 1s1.5-1 3-1 1.5 1 3 1 1.5-1 3-1 1.5 1 2 1v2c-.5 0-.5-1-2-1s-1.5 1-3 1-1.5-1-3-1-1.5 1-3 1-1.5-1-3-1z"/>' +
  '<path class="jp-icon3" fill="#616161" d="M8 1l5 3v4.5c0 .8-.4 1.3-1 1.5H4c-.6-.2-1-.7-1-1.5V4zm0 2.2L5 5v3h6V5z"/>' +
  '</svg>';

export const lakeIcon = new LabIcon({ name: 'lakesession:icon', svgstr: ICON_SVG });

export const PANEL_ID = 'lakesession-panel';
const OPEN_COMMAND = 'lakesession:open-panel';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'lakesession:plugin',
  description: 'Identity, token expiry and per-table credential TTLs of the running kernels\' lakesession sessions.',
  autoStart: true,
  requires: [ILabShell],
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, shell: ILabShell, statusBar: IStatusBar | null): void => {
    const model = new StatusModel(app.serviceManager.serverSettings);

    const panel = new StatusPanel(model);
    panel.id = PANEL_ID;
    panel.title.icon = lakeIcon;
    panel.title.caption = 'lakesession: identity and credentials';
    shell.add(panel, 'right', { rank: 900 });

    app.commands.addCommand(OPEN_COMMAND, {
      label: 'Show lakesession panel',
      execute: () => shell.activateById(PANEL_ID)
    });

    if (statusBar) {
      const item = new StatusItem(model, () => void app.commands.execute(OPEN_COMMAND));
      statusBar.registerStatusItem('lakesession:status', {
        item,
        align: 'left',
        rank: 50,
        isActive: () => true
      });
    }
    model.start();
  }
};

export default plugin;
